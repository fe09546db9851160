"""Small pure helpers shared by the programs (exporter, forecaster, top, demo), so that
none of them imports another program for them."""

"""gpu-eta forecaster: learns how long training runs take and publishes when they end."""

"""Built-in scenarios (package data, so ``--simulate`` works from an installed wheel)."""

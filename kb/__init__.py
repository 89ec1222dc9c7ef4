"""The contract between lab notebooks, the GPU runner and the results they publish."""

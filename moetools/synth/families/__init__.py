"""One module per family of synthetic builders; each has a BUILDERS table."""

"""Data: loading and validating user texts (``loaders``, ``tables``), the embedded corpus, instruction pairs."""

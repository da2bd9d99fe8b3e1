"""Reports: plots, a self-contained HTML page and Markdown for any run folder."""

"""The offline HTML page shared by the report and the history trend page: blocks (text, tables, figures, inline
SVG charts) in sections, one inline stylesheet and script, nothing fetched from elsewhere."""

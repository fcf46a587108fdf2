"""Reports: the report models, the renderers (terminal, Markdown, HTML, JSON), charts, compare and the JSON
Schemas."""

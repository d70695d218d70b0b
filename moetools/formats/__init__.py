"""Wire formats shared with the serving fork and between tools. Each format lives in one module here,
the only place that reads or writes it."""

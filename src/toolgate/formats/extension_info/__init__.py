"""Extension info schemas: tools with prompt examples and a tile display."""

"""Tables, schemas, atomic writes and DVC hash lookup."""

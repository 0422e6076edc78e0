"""Type registry: one module per PostgreSQL type family, each declaring how its types are loaded
and written in every format (``family.py``); ``registry.py`` collects them."""

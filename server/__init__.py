"""ascendscope's web server: FastAPI JSON API (``server.api``), Jinja2 pages (``server.pages``), the run store
(``server.runs``) and read-only database access (``server.db``). Entry point: ``server.cli:main``."""

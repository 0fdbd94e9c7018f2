"""Static assets of the dashboard (``frontend/static``): plain ES modules, CSS, no build step."""

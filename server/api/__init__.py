"""The JSON API: one router module per view (each exposes ``router``, an ``APIRouter``, listed in
``server.app.API_MODULES``). What they share lives in :mod:`.answers` (the error type, the response classes,
the integer bounds) and :mod:`.deps` (the ``Annotated`` dependencies and :class:`.deps.RunDb`)."""

"""Which handler answers a request: exact paths, GET (and so HEAD) only."""

from __future__ import annotations

from .messages import Handler, Request, Response, json_error

ALLOW = "GET, HEAD"


class Router:
    """Maps exact paths to GET handlers; unknown paths get JSON 404, other methods 405."""

    def __init__(self) -> None:
        self._routes: dict[str, Handler] = {}

    def add_get(self, path: str, handler: Handler) -> None:
        """Serves GET and HEAD of `path` with `handler` (HEAD answers without the body)."""
        self._routes[path] = handler

    async def __call__(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            return json_error(404, "Not Found")
        if request.method not in ("GET", "HEAD"):
            response = json_error(405, "Method Not Allowed")
            response.headers["Allow"] = ALLOW
            return response
        return await handler(request)

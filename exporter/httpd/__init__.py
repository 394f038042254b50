"""The agent's own small HTTP/1.1 server on asyncio (the agent does not import aiohttp).

`serve(handler, host, port, limits, ssl_context)` answers every request with
`await handler(request)`; `Router` maps paths to handlers. The protocol and its
limits are in connection.py, request parsing in parser.py, the request and
response types in messages.py.
"""

from .connection import MAX_REQUEST_BYTES
from .messages import Handler, Headers, Request, Response, json_error, json_response
from .routing import Router
from .server import Serving, serve

__all__ = ["MAX_REQUEST_BYTES", "Handler", "Headers", "Request", "Response", "Router",
           "Serving", "json_error", "json_response", "serve"]

"""ASGI middleware of the service: the request body's size limit, counting requests, and
CORS whose refusals are JSON like every other 4xx."""

import json

from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Match

from qres.service.state import Metrics


async def _send_error(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413, declared or streamed."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        too_big = f"the request body is larger than {self.limit} bytes."
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _send_error(send, 413, too_big)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await _send_error(send, 413, too_big)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class RequestMetrics:
    """Count every answered request by route template, method and status."""

    def __init__(self, app, metrics: Metrics, routes):
        self.app, self.metrics, self.routes = app, metrics, routes

    def route_of(self, scope) -> str:
        """The template of the route that answered ("/questions/{qid}"), "unmatched" if none."""
        route = scope.get("route")
        if route is None:  # routes added by the framework itself set no scope["route"]
            route = next((r for r in self.routes if r.matches(scope)[0] == Match.FULL), None)
        return getattr(route, "path", "unmatched")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500

        async def watch(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.requests.labels(self.route_of(scope), scope["method"], str(status)).inc()


class JsonCORSMiddleware(CORSMiddleware):
    """Starlette's CORS, its refused preflight a one-sentence JSON 400 (it was plain text:
    "Disallowed CORS origin")."""

    def preflight_response(self, request_headers):
        answer = super().preflight_response(request_headers)
        if answer.status_code != 400:
            return answer
        refused = answer.body.decode().removeprefix("Disallowed CORS ")
        headers = {k: v for k, v in answer.headers.items() if k.lower().startswith("access-")}
        message = f"the cross-origin request is not allowed: its {refused} is not one served."
        return JSONResponse({"error": message}, 400, headers=headers)

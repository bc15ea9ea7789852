"""Media download over plain HTTP, with Range support so a <video> element can seek."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mediagraph.context import Context
from mediagraph.errors import BadUserInput, NotFound
from mediagraph.ids import MAX_ID, decode_id
from mediagraph.resolvers import media as resolvers


def _media_id(raw: str) -> int:
    """Both the raw id of `Media.contentUrl` and the global `Media.id` are accepted."""
    if raw.isdigit() and 0 < int(raw) <= MAX_ID:
        return int(raw)
    return decode_id(raw, "Media")


async def media_content(request: Request) -> Response:
    try:
        media_id = _media_id(request.path_params["media_id"])
    except BadUserInput as error:
        return JSONResponse({"error": error.message, "code": error.code}, status_code=400)
    context = Context(request.app.state.services, request)
    try:
        response: Response = await resolvers.content_response(context, media_id=media_id, request=request)
        return response
    except NotFound as error:
        return JSONResponse({"error": error.message, "code": error.code}, status_code=404)
    finally:
        await context.close()

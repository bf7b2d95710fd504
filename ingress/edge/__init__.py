"""aiohttp server side: handlers, middleware, SSE writing. No business logic."""

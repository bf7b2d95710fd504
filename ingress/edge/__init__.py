"""aiohttp server side: handlers, middleware, SSE writing, the app's typed keys, the drain and start
pacing. No business logic."""

"""aiohttp server side: routes, endpoints, request bodies, the writers to the client, SSE rendering,
middleware, the app's typed keys, the drain and start pacing. No business logic."""

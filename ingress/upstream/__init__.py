"""The only aiohttp client code: sending CompletionRequests to internal services."""

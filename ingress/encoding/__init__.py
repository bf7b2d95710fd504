"""The edge's requests in the contract's terms: OpenAI's (and, through their chat reading, Anthropic's)
requests encoded into `ingress.wire`'s tables, their passports computed, and a CompletionRequest read back
into OpenAI's shape.

`ingress.wire` is the contract and imports nothing of a dialect; whatever maps a dialect onto it lives
here, on the edge's side. A bridge or a service that wants a request in OpenAI's shape reads it with
`ingress.encoding.reading`.
"""

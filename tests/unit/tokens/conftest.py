"""tiktoken's own encodings, offline: what the counts of ingress/tokens/ are checked against."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken

# Where tiktoken fetches the two vocabularies (tiktoken_ext/openai_public.py): the cache key is their SHA-1.
URLS = {"o200k": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "cl100k": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"}


@pytest.fixture(scope="package")
def tiktoken_encodings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tiktoken.Encoding]]:
    """tiktoken's own encodings, built from the vocabulary files bpe-openai ships, with no network: its
    cache is an empty directory given those files under the keys it looks for (it checks their SHA-256
    against the hashes it expects), and any download would go to a proxy that refuses connections."""
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    spec = importlib.util.find_spec("bpe_openai")
    assert spec is not None and spec.submodule_search_locations
    data = Path(spec.submodule_search_locations[0]) / "data"
    for name, url in URLS.items():
        raw = gzip.decompress((data / f"{name}_base.tiktoken.gz").read_bytes())
        (cache / hashlib.sha1(url.encode()).hexdigest()).write_bytes(raw)
    seeded = sorted(p.name for p in cache.iterdir())
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        for proxy in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            env.setenv(proxy, "http://127.0.0.1:9")  # the discard port: nothing listens
        env.delenv("NO_PROXY", raising=False)
        env.delenv("no_proxy", raising=False)
        encodings = {name: tiktoken.get_encoding(f"{name}_base") for name in URLS}
        assert sorted(p.name for p in cache.iterdir()) == seeded, "tiktoken fetched something"
    # the encodings are built: the refusing proxy ends here, before other fixtures run (pip,
    # installing the SmolLM2 model on a new machine, would go through it and fail)
    yield encodings

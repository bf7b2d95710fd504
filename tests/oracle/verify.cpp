// FlatBuffers C++ Verifier oracle: checks each buffer it is sent against schema/llm_gateway.fbs.
//
// stdin carries records, back to back:
//   kind    1 byte   'Q' CompletionRequest, 'R' CompletionResponse, 'C' CompletionChunk, 'E' Error,
//                    'M' EmbeddingRequest, 'V' EmbeddingResponse
//   flags   1 byte   bit 0: the buffer is size-prefixed
//   length  4 bytes  little-endian, the byte count that follows
//   data    length bytes
// For each record one byte is written and flushed: '1' the verifier accepts it, '0' it rejects it.
// A size-prefixed record must also be exactly one frame: flatbuffers::Verifier only checks that the
// prefix does not overrun the data, but a prefix that understates it would desync a stream reader.
// Exit status: 0 at EOF on a record boundary, 2 on a malformed record (unknown kind, short read).

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "flatbuffers/flatbuffers.h"
#include "llm_gateway_generated.h"

namespace {

// The schema declares a file_identifier for its root_type only; the other roots carry their own,
// which the generated header cannot know (see ingress/wire/identifiers.py).
constexpr const char* kResponseIdentifier = "LGRS";
constexpr const char* kChunkIdentifier = "LGCK";
constexpr const char* kErrorIdentifier = "LGER";
constexpr const char* kEmbeddingRequestIdentifier = "LGEQ";
constexpr const char* kEmbeddingResponseIdentifier = "LGES";

template <typename T>
bool Verify(const uint8_t* buf, size_t len, const char* identifier, bool size_prefixed) {
  flatbuffers::Verifier::Options opts;  // defaults: max_depth 64, max_tables 1e6, alignment checked
  if (len >= opts.max_size) return false;
  flatbuffers::Verifier verifier(buf, len, opts);
  if (!size_prefixed) return verifier.VerifyBuffer<T>(identifier);
  return len >= sizeof(flatbuffers::uoffset_t) &&
         flatbuffers::ReadScalar<flatbuffers::uoffset_t>(buf) == len - sizeof(flatbuffers::uoffset_t) &&
         verifier.VerifySizePrefixedBuffer<T>(identifier);
}

bool ReadExactly(void* dst, size_t len) {
  return len == 0 || std::fread(dst, 1, len, stdin) == len;
}

}  // namespace

int main() {
  // 8-byte words, so the copy is aligned for every scalar a buffer may hold.
  std::vector<uint64_t> storage;
  for (;;) {
    uint8_t header[6];
    const size_t got = std::fread(header, 1, sizeof header, stdin);
    if (got == 0 && std::feof(stdin)) return 0;
    if (got != sizeof header) {
      std::fprintf(stderr, "verify: truncated record header (%zu of 6 bytes)\n", got);
      return 2;
    }
    const char kind = static_cast<char>(header[0]);
    const bool size_prefixed = (header[1] & 1) != 0;
    const size_t len = static_cast<size_t>(header[2]) | static_cast<size_t>(header[3]) << 8 |
                       static_cast<size_t>(header[4]) << 16 | static_cast<size_t>(header[5]) << 24;

    storage.assign(len / sizeof(uint64_t) + 1, 0);
    auto* buf = reinterpret_cast<uint8_t*>(storage.data());
    if (!ReadExactly(buf, len)) {
      std::fprintf(stderr, "verify: truncated record body (wanted %zu bytes)\n", len);
      return 2;
    }

    bool ok;
    switch (kind) {
      case 'Q':
        ok = Verify<LLMGateway::CompletionRequest>(
            buf, len, LLMGateway::CompletionRequestIdentifier(), size_prefixed);
        break;
      case 'R':
        ok = Verify<LLMGateway::CompletionResponse>(buf, len, kResponseIdentifier, size_prefixed);
        break;
      case 'C':
        ok = Verify<LLMGateway::CompletionChunk>(buf, len, kChunkIdentifier, size_prefixed);
        break;
      case 'E':
        ok = Verify<LLMGateway::Error>(buf, len, kErrorIdentifier, size_prefixed);
        break;
      case 'M':
        ok = Verify<LLMGateway::EmbeddingRequest>(buf, len, kEmbeddingRequestIdentifier, size_prefixed);
        break;
      case 'V':
        ok = Verify<LLMGateway::EmbeddingResponse>(buf, len, kEmbeddingResponseIdentifier, size_prefixed);
        break;
      default:
        std::fprintf(stderr, "verify: unknown record kind 0x%02x\n", header[0]);
        return 2;
    }
    std::fputc(ok ? '1' : '0', stdout);
    std::fflush(stdout);
  }
}

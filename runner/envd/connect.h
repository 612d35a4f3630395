/* The Connect protocol's framing as E2B's SDK speaks it over HTTP/1.1 (docs/design/envd.md):
 * a stream's messages are 5-byte envelopes (flags, 32-bit big-endian length, then that many
 * bytes of JSON), the last one flagged end-of-stream and carrying the error, if any; unary
 * errors are {"code","message"} with the HTTP status of their code. Also the parts of
 * protobuf's JSON mapping the envd face needs (bytes as base64, fields by either name).
 * Pure: no loop, no runner state (fuzzed by tests/fuzz/fuzz_connect.c). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define CONNECT_FLAG_COMPRESSED 0x01
#define CONNECT_FLAG_END 0x02
/* The largest message the face takes in one envelope (a SendInput's data, base64). */
#define CONNECT_MSG_MAX (4u << 20)

/* Connect's error codes (connectrpc.com/docs/protocol: "Error Codes"). */
enum connect_code {
	CC_OK = 0,
	CC_CANCELED,
	CC_UNKNOWN,
	CC_INVALID_ARGUMENT,
	CC_DEADLINE_EXCEEDED,
	CC_NOT_FOUND,
	CC_ALREADY_EXISTS,
	CC_PERMISSION_DENIED,
	CC_RESOURCE_EXHAUSTED,
	CC_FAILED_PRECONDITION,
	CC_ABORTED,
	CC_OUT_OF_RANGE,
	CC_UNIMPLEMENTED,
	CC_INTERNAL,
	CC_UNAVAILABLE,
	CC_DATA_LOSS,
	CC_UNAUTHENTICATED,
};
/* "not_found"...; "unknown" for a value out of range. */
const char *connect_code_name(enum connect_code c);
/* The HTTP status of a unary error with this code (Connect's table). */
unsigned connect_code_http(enum connect_code c);
/* The code of the runner's error code (core/error.h's names: NOT_FOUND, FORBIDDEN...). */
enum connect_code connect_code_of(const char *runner_code);

/* One envelope at the front of data[0..len): 1 with *flags, *msg, *msg_len and *used set,
 * 0 when more bytes are needed, -1 when the envelope cannot be right (*why says how: a
 * length over max, a compressed message nobody negotiated, flags unknown). */
int connect_env_parse(const char *data, size_t len, size_t max, uint8_t *flags, const char **msg,
		      size_t *msg_len, size_t *used, const char **why);
/* The single message of a server-streaming request body: exactly one envelope, nothing
 * after it. 0, or -1 with *why. */
int connect_env_single(const char *data, size_t len, size_t max, const char **msg, size_t *msg_len,
		       const char **why);
/* Append an envelope of flags and msg[0..len) to b. 0 or -ENOMEM. */
int connect_env_append(struct buf *b, uint8_t flags, const char *msg, size_t len);
/* The end-of-stream envelope: {} or {"error":{"code","message"}}. 0 or -ENOMEM. */
int connect_end_append(struct buf *b, enum connect_code c, const char *message);
/* A unary error's body {"code","message"} (new reference). */
json_t *connect_error_body(enum connect_code c, const char *message);

/* A message field by its JSON name or its proto name (protobuf's JSON mapping accepts both):
 * camel "exitCode", proto "exit_code". NULL when absent or null. */
json_t *connect_field(json_t *msg, const char *camel, const char *proto);
/* Base64 (standard or URL-safe, padded or not) into a new buffer (*out, *out_len; NUL
 * after it). 0, -1 when not base64, -ENOMEM. */
int connect_b64_decode(const char *s, size_t len, unsigned char **out, size_t *out_len);
/* Base64 of s at o ((len + 2) / 3 * 4 bytes, padded), as base64_encode_to, faster. */
size_t connect_b64_encode(char *o, const unsigned char *s, size_t len);
/* A uint32 field given as a number or a decimal string (both are proto JSON). 0 absent
 * (*v untouched), 1 set, -1 not a uint32. */
int connect_u32(json_t *msg, const char *camel, const char *proto, uint32_t *v);

#include "core/util.h"

#include <stdlib.h>

#include "unit.h"

static void json_case(const char *in, size_t len, const char *want)
{
	struct buf b = {0};
	buf_append_json_str(&b, in, len);
	buf_append(&b, "", 1);
	CHECK_STR(b.data, want);
	buf_free(&b);
}

static void b64_case(const char *in, const char *want)
{
	struct buf b = {0};
	buf_append_base64(&b, (const unsigned char *)in, strlen(in));
	buf_append(&b, "", 1);
	CHECK_STR(b.data, want);
	buf_free(&b);
}

TEST(json_string_escapes)
{
	json_case("plain", 5, "\"plain\"");
	json_case("q\"b\\n\n\r\t", 8, "\"q\\\"b\\\\n\\n\\r\\t\"");
	json_case("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\"");
	json_case("caf\xc3\xa9", 5, "\"caf\xc3\xa9\"");
	json_case("\xff" "a", 2, "\"\xef\xbf\xbd" "a\"");           /* invalid byte */
	json_case("\xc3", 1, "\"\xef\xbf\xbd\"");                  /* truncated sequence */
	json_case("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* surrogate */
	json_case("\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");  /* overlong */
	json_case("a\0b", 3, "\"a\\u0000b\"");
}

TEST(base64)
{
	b64_case("", "");
	b64_case("f", "Zg==");
	b64_case("fo", "Zm8=");
	b64_case("foo", "Zm9v");
	b64_case("foobar", "Zm9vYmFy");
}

TEST(utf8_valid)
{
	CHECK(utf8_valid((const unsigned char *)"caf\xc3\xa9", 5));
	CHECK(!utf8_valid((const unsigned char *)"\xff", 1));
	CHECK(!utf8_valid((const unsigned char *)"\xc3", 1));
}

TEST(utf8_incomplete_tail)
{
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab\xc3", 3) == 1);
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab\xe2\x82", 4) == 2);
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab\xe2\x82\xac", 5) == 0);
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab", 2) == 0);
	CHECK(utf8_incomplete_tail((const unsigned char *)"\xff", 1) == 0);
}

TEST(random_and_hex_ids)
{
	char id[33], id2[33];
	CHECK(random_id(id) == 0 && random_id(id2) == 0);
	CHECK(is_hex_id(id));
	CHECK(strcmp(id, id2) != 0);
	CHECK(!is_hex_id("ABCDEF0123456789abcdef0123456789"));
	CHECK(!is_hex_id("abc"));
}

TEST(secret_equal)
{
	CHECK(secret_equal("token", "token"));
	CHECK(!secret_equal("toke", "token"));
	CHECK(!secret_equal("tokenx", "token"));
	CHECK(!secret_equal("", "token"));
}

TEST(signal_name)
{
	CHECK_STR(signal_name(15), "SIGTERM");
	CHECK_STR(signal_name(9), "SIGKILL");
	CHECK_STR(signal_name(999), "SIG?");
}

TEST(buf_append_and_avail)
{
	struct buf b = {0};
	for (int i = 0; i < 1000; i++)
		buf_appendf(&b, "%04d", i);
	CHECK(b.len == 4000);
	b.off = 3990;
	CHECK(buf_avail(&b) == 10);
	buf_append(&b, "xyz", 3);
	CHECK(buf_avail(&b) == 13);
	CHECK(memcmp(b.data + b.off, "97" "0998" "0999" "xyz", 13) == 0);
	buf_free(&b);
}

/* FileInfo, the files API's description of one file, exactly as execd
 * writes it. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "core/buf.h"

/* id -> name cache for one response (listing thousands of entries must not
 * read /etc/passwd thousands of times). */
struct files_names {
	unsigned next;
	struct {
		uint32_t id;
		bool used, group;
		char name[64];
	} e[16];
};
/* The name of user (group) id through nc: looked up once per response, NULL
 * when passwd (group) has none. */
const char *files_id_name(struct files_names *nc, uint32_t id, bool group);
/* Append one FileInfo object:
 * {"path","type","size","modified_at","created_at","owner","group","mode"}
 * (RFC 3339 UTC times; mode: permission bits as octal digits, 755). */
void files_info_json(struct buf *out, const char *path, const struct stat *st,
		     struct files_names *nc);

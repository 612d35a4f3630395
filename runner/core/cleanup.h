/* Scoped cleanup (GCC/Clang __attribute__((cleanup))), as crun does: a
 * variable declared `cleanup_free char *p = NULL;` is freed when it goes out
 * of scope; take_ptr()/take_fd() hand ownership on (the variable is left
 * NULL / -1 so the cleanup does nothing). The close cleanup keeps errno. */
#pragma once
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_freep(void *p)
{
	free(*(void **)p);
}

static inline void cleanup_closep(const int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

static inline void cleanup_json_decrefp(json_t **j)
{
	json_decref(*j);
}

#define cleanup_free __attribute__((cleanup(cleanup_freep)))
#define cleanup_close __attribute__((cleanup(cleanup_closep)))
#define cleanup_json __attribute__((cleanup(cleanup_json_decrefp)))

#define take_ptr(p)                                                                                \
	({                                                                                         \
		__typeof__(p) take_ptr_v_ = (p);                                                   \
		(p) = NULL;                                                                        \
		take_ptr_v_;                                                                       \
	})
#define take_fd(fd)                                                                                \
	({                                                                                         \
		int take_fd_v_ = (fd);                                                             \
		(fd) = -1;                                                                         \
		take_fd_v_;                                                                        \
	})

/* The intrusive doubly-linked lists of the runner: a struct with a next and
 * a prev member of its own type (`next`/`prev`, or other names with the _AT
 * forms when a struct is in several lists), and a head pointer (NULL:
 * empty). Macros, so every list keeps its own struct layout and types. */
#pragma once
#include <stddef.h>

/* Puts node first in the list at head. */
#define LIST_PUSH_AT(head, node, next, prev)                                                       \
	do {                                                                                       \
		__typeof__(node) list_n_ = (node);                                                 \
		list_n_->prev = NULL;                                                              \
		list_n_->next = (head);                                                            \
		if (list_n_->next)                                                                 \
			list_n_->next->prev = list_n_;                                             \
		(head) = list_n_;                                                                  \
	} while (0)

/* Takes node out of the list at head and clears its links. A node with no
 * prev changes head only when it is the head (a node in no list leaves the
 * list alone). */
#define LIST_UNLINK_AT(head, node, next, prev)                                                     \
	do {                                                                                       \
		__typeof__(node) list_n_ = (node);                                                 \
		if (list_n_->prev)                                                                 \
			list_n_->prev->next = list_n_->next;                                       \
		else if ((head) == list_n_)                                                        \
			(head) = list_n_->next;                                                    \
		if (list_n_->next)                                                                 \
			list_n_->next->prev = list_n_->prev;                                       \
		list_n_->next = list_n_->prev = NULL;                                              \
	} while (0)

#define LIST_PUSH(head, node) LIST_PUSH_AT(head, node, next, prev)
#define LIST_UNLINK(head, node) LIST_UNLINK_AT(head, node, next, prev)

/* LIST_UNLINK for a list that also keeps its tail. */
#define LIST_UNLINK_TAIL(head, tail, node)                                                         \
	do {                                                                                       \
		__typeof__(node) list_t_ = (node);                                                 \
		if (!list_t_->next && (tail) == list_t_)                                           \
			(tail) = list_t_->prev;                                                    \
		LIST_UNLINK(head, list_t_);                                                        \
	} while (0)

/* Puts node last in a list that keeps its tail. */
#define LIST_APPEND_TAIL(head, tail, node)                                                         \
	do {                                                                                       \
		__typeof__(node) list_t_ = (node);                                                 \
		list_t_->next = NULL;                                                              \
		list_t_->prev = (tail);                                                            \
		if (list_t_->prev)                                                                 \
			list_t_->prev->next = list_t_;                                             \
		else                                                                               \
			(head) = list_t_;                                                          \
		(tail) = list_t_;                                                                  \
	} while (0)

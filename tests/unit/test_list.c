#include "core/list.h"

#include "unit.h"

struct node {
	int v;
	struct node *next, *prev;
};

/* The values from head to tail, checking every back link on the way. */
static void order(struct node *head, char *out)
{
	struct node *prev = NULL;
	for (struct node *n = head; n; prev = n, n = n->next) {
		CHECK(n->prev == prev);
		*out++ = (char)('0' + n->v);
	}
	*out = 0;
}

TEST(push_and_unlink)
{
	struct node a = {1, NULL, NULL}, b = {2, NULL, NULL}, c = {3, NULL, NULL};
	struct node *head = NULL;
	char s[8];
	LIST_PUSH(head, &a);
	LIST_PUSH(head, &b);
	LIST_PUSH(head, &c);
	order(head, s);
	CHECK_STR(s, "321");
	LIST_UNLINK(head, &b); /* middle */
	order(head, s);
	CHECK_STR(s, "31");
	CHECK(!b.next && !b.prev);
	LIST_UNLINK(head, &c); /* head */
	order(head, s);
	CHECK_STR(s, "1");
	LIST_UNLINK(head, &a); /* last */
	CHECK(head == NULL);
	/* A node in no list leaves the list alone. */
	LIST_PUSH(head, &a);
	LIST_UNLINK(head, &b);
	order(head, s);
	CHECK_STR(s, "1");
}

TEST(unlink_tail)
{
	struct node n[4] = {{0}};
	struct node *head = NULL, *tail = NULL;
	for (int i = 1; i <= 3; i++) {
		n[i].v = i;
		LIST_APPEND_TAIL(head, tail, &n[i]);
	}
	char s[8];
	order(head, s);
	CHECK_STR(s, "123");
	LIST_UNLINK_TAIL(head, tail, &n[3]);
	CHECK(tail == &n[2]);
	LIST_UNLINK_TAIL(head, tail, &n[1]);
	CHECK(tail == &n[2] && head == &n[2]);
	LIST_UNLINK_TAIL(head, tail, &n[2]);
	CHECK(!head && !tail);
	LIST_APPEND_TAIL(head, tail, &n[1]);
	CHECK(head == &n[1] && tail == &n[1] && !n[1].prev && !n[1].next);
}

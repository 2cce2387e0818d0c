/* SPDX-License-Identifier: MIT */
/* Fork safety: the hooks' list and its pthread_atfork() handlers (see
 * forksafe.h). */
#include "common/forksafe.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

static pthread_mutex_t hooks_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ckpt_fork_hook *hooks;	/* guarded by hooks_mu */
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void all_prepare(void)
{
	struct ckpt_fork_hook *k;

	pthread_mutex_lock(&hooks_mu);
	for (k = hooks; k; k = k->next)
		k->prepare(k->arg);
}

static void all_parent(void)
{
	struct ckpt_fork_hook *k;

	for (k = hooks; k; k = k->next)
		k->parent(k->arg);
	pthread_mutex_unlock(&hooks_mu);
}

static void all_child(void)
{
	struct ckpt_fork_hook *k;

	for (k = hooks; k; k = k->next)
		k->child(k->arg);
	pthread_mutex_init(&hooks_mu, NULL);
}

static void hooks_init(void)
{
	(void)pthread_atfork(all_prepare, all_parent, all_child);
}

void ckpt_fork_hook_add(struct ckpt_fork_hook *k)
{
	pthread_once(&hooks_once, hooks_init);
	pthread_mutex_lock(&hooks_mu);
	k->prev = NULL;
	k->next = hooks;
	if (hooks)
		hooks->prev = k;
	hooks = k;
	pthread_mutex_unlock(&hooks_mu);
}

void ckpt_fork_hook_remove(struct ckpt_fork_hook *k)
{
	pthread_mutex_lock(&hooks_mu);
	if (k->prev)
		k->prev->next = k->next;
	else if (hooks == k)
		hooks = k->next;
	if (k->next)
		k->next->prev = k->prev;
	k->prev = k->next = NULL;
	pthread_mutex_unlock(&hooks_mu);
}

/* SPDX-License-Identifier: MIT */
/*
 * Fork safety: objects whose locks a forked child can reach (an S3
 * engine's pool and share locks, a credential set's lock, a lazy
 * checkpoint's locate lock) register a hook.  One pthread_atfork()
 * handler per process runs them: before the fork every hook's prepare
 * takes its object's locks, so that no other thread holds one across
 * the fork; after it, parent releases them, and child reinitialises
 * them and drops what belongs to the parent's threads (workers in use,
 * a refresher, a batch being located).
 */
#ifndef CKPT_FORKSAFE_H
#define CKPT_FORKSAFE_H

struct ckpt_fork_hook {
	void (*prepare)(void *arg);	/* take the object's locks */
	void (*parent)(void *arg);	/* release them */
	void (*child)(void *arg);	/* reinitialise them, the only
					 * thread left */
	void *arg;
	struct ckpt_fork_hook *prev, *next;	/* guarded by the list's
						 * lock */
};

/*
 * Run k's handlers at every fork from now on, k (caller-owned) until
 * ckpt_fork_hook_remove().  The object's locks nest in no other of the
 * hooked locks, so the order hooks run in cannot deadlock.  Thread-safe;
 * not from a hook.
 */
void ckpt_fork_hook_add(struct ckpt_fork_hook *k);

/* Stop running k's handlers (k added, or zeroed: then nothing).
 * Thread-safe; not from a hook. */
void ckpt_fork_hook_remove(struct ckpt_fork_hook *k);

#endif

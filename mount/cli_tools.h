/* SPDX-License-Identifier: MIT */
/*
 * The subcommands that need no mount (info, ls, plan, cat, extract, stats,
 * verify, index): they use core/ only, so they work where FUSE is not
 * available.
 */
#ifndef CKFS_CLI_TOOLS_H
#define CKFS_CLI_TOOLS_H
#include <stddef.h>

/* Run the subcommand argv[0] with its arguments argv[1, argc) (parsed
 * with getopt_long, which may reorder argv).  Returns the exit code, or
 * -1 when argv[0] is not one of these subcommands. */
int cli_tool_run(int argc, char **argv);
/* The name of subcommand i ("info", ...), or NULL past the last. */
const char *cli_tool_name(size_t i);

#endif

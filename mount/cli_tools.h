/* SPDX-License-Identifier: MIT */
/*
 * The subcommands that need no mount (info, ls, plan, cat, extract): they
 * use core/ only, so they work where FUSE is not available.
 */
#ifndef CKFS_CLI_TOOLS_H
#define CKFS_CLI_TOOLS_H

/* Run subcommand name with its arguments (after the name).  Returns the
 * exit code, or -1 when name is not one of these subcommands. */
int cli_tool_run(const char *name, int argc, char **argv);

#endif

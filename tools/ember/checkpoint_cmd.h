/* `ember checkpoint ...` (checkpoint_cmd.c), called by main.c. */
#ifndef EMBER_TOOL_CHECKPOINT_CMD_H
#define EMBER_TOOL_CHECKPOINT_CMD_H

/* argv[0] is "checkpoint"; returns the exit code. */
int ember_checkpoint_main(int argc, char **argv);

#endif

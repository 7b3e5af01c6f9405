#!/bin/sh
# A shell script as a corral worker: corral runs it once per claimed task.
#
#   corral worker --id sh-1 --role developer -- sh examples/shell_worker.sh
#
# The task arrives as JSON on stdin (and in $CORRAL_TASK, with $CORRAL_TASK_ID).
# Exit 0 completes the task with stdout as its result; any other exit fails it
# with the tail of stderr.
task=$(cat)
case "$task" in
  *'"title": ""'*) echo "empty title" >&2; exit 1 ;;
esac
echo "handling task $CORRAL_TASK_ID on $CORRAL_NODE_ID" >&2
printf '{"handled_by": "%s", "bytes": %s}\n' "$CORRAL_NODE_ID" "$(printf %s "$task" | wc -c)"

#!/usr/bin/env bash
# Where `make test` spends the machine's CPU: the kernel's process accounting (acct), which records every process that
# ends - lab hosts' processes too, as they share this kernel - with its CPU seconds. Best effort: without root or
# accton it says so and does nothing else; it never fails the run.
#   tools/cpu_account.sh start FILE   turn accounting on into FILE (a new, empty file)
#   tools/cpu_account.sh report FILE [N]  CPU seconds so far by command (the N largest), and in all
#   tools/cpu_account.sh stop         turn accounting off
set -uo pipefail
action=${1:-}
file=${2:-}
case $action in
  start)
    if [ "$(id -u)" != 0 ] || ! command -v accton > /dev/null; then
      echo "=== cpu account: off (needs root and accton, Debian's acct)"
      exit 0
    fi
    mkdir -p "$(dirname "$file")" && : > "$file" && accton "$file" > /dev/null 2>&1 \
      && echo "=== cpu account: on ($file)" || echo "=== cpu account: off (accton refused)"
    ;;
  report)
    [ -s "$file" ] || exit 0
    # lastcomm: command, flags, user, tty, CPU seconds, "secs", start; commands are cut at 15 characters by the kernel.
    lastcomm -f "$file" 2> /dev/null | awk -v top="${3:-12}" '
      { for (i = 2; i < NF; i++) if ($i == "secs") { cpu[$1] += $(i - 1); all += $(i - 1); break } }
      END {
        printf "=== cpu account: %.0f CPU seconds in processes that ended\n", all
        n = 0
        for (c in cpu) order[++n] = c
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (cpu[order[j]] > cpu[order[i]]) {
          t = order[i]; order[i] = order[j]; order[j] = t
        }
        for (i = 1; i <= n && i <= top; i++) printf "=== cpu %8.0f s %5.1f%% %s\n", cpu[order[i]], 100 * cpu[order[i]] / all, order[i]
      }'
    ;;
  stop)
    command -v accton > /dev/null && [ "$(id -u)" = 0 ] && accton off > /dev/null 2>&1
    exit 0
    ;;
  *)
    echo "usage: $0 start FILE | report FILE [N] | stop" >&2
    exit 2
    ;;
esac

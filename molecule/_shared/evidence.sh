#!/bin/sh
# What a lab host says about the collection's units when a test or a step failed (molecule/_shared/evidence.py and
# evidence.yml): each section under its own header, nothing changed on the host.
section() { printf '\n===== %s\n' "$1"; }
section date
date --iso-8601=ns
uptime
section units
systemctl list-units --all --no-pager --plain 'llamarpc-*' 'wg-quick@*'
section status
systemctl status --no-pager --full 'llamarpc-*' 'wg-quick@*' 2>&1
section journal
journalctl -b --no-pager -o short-iso-precise -u 'llamarpc-*' -u 'wg-quick@*' 2>&1 | tail -n 4000
for file in /etc/llamarpc/coordinator/plan.json /etc/llamarpc/coordinator/*.env /run/llamarpc/coordinator/*; do
  [ -f "$file" ] || continue
  section "$file"
  stat -c '%y %s bytes' "$file"
  cat "$file"
done
section "warnings of this boot (all units)"
journalctl -b --no-pager -o short-iso-precise -p warning 2>&1 | tail -n 300
section nftables
nft list ruleset 2>&1
true

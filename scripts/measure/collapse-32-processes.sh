#!/bin/bash
# docs/collapse.md: HUGESHM=target/release/hugeshm scripts/measure/collapse-32-processes.sh (as root)
# 1 GiB SysV on 4 KiB pages, 32 processes (holder + 31 children that wrote every page once)
T=${TESTPROC:-target/debug/hugeshm-testproc}
H=${HUGESHM:-hugeshm}
# The holder's report and its stdin (a FIFO: closing it ends the holder,
# which removes its segment) in a new private directory.
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
for threads in 1 2; do
  mkfifo "$dir/hold"
  $T --touch --align 2M --forks 31 --write-every 0 sysv-plain:1G <"$dir/hold" >"$dir/tp.json" 2>&1 &
  exec 3>"$dir/hold"
  for i in $(seq 100); do [ -s "$dir/tp.json" ] && break; sleep 0.2; done
  P=$(python3 -c "import json,sys;print(json.loads(open(sys.argv[1]).readline())['pid'])" "$dir/tp.json")
  sleep 5   # children write every page once
  pte() { local t=0; for p in $P $(pgrep -P $P); do v=$(awk '/VmPTE/{print $2}' /proc/$p/status); t=$((t+v)); done; echo $t; }
  echo "threads $threads: processes $(( $(pgrep -P $P | wc -l) + 1 )), VmPTE sum before: $(pte) kB, PageTables $(awk '/^PageTables/{print $2}' /proc/meminfo) kB"
  $H collapse --pid $P --threads $threads --json | python3 -c "import json,sys; r=json.load(sys.stdin)['result']; print('  collapsed', r['collapsed'], 'of', r['blocks'], 'in %.2f s, %.2f GB/s' % (r['seconds'], r['gbps']))"
  echo "  VmPTE sum after: $(pte) kB, PageTables $(awk '/^PageTables/{print $2}' /proc/meminfo) kB"
  exec 3>&-
  wait
  rm -f "$dir/hold" "$dir/tp.json"
done

#!/usr/bin/env bash
# bench/gpu_memlog.sh OUTFILE: GPU memory in use (MiB) every second, in total and per process,
# with each process's ktuned role (tuned.evaluation.worker, .zygote = a runner, --spare, compile).
# Run beside a campaign on a GPU box (bench/RESULTS.md, eighteenth session): bash bench/gpu_memlog.sh mem.log & ...; kill $!
while true; do
  line="$(date +%s.%N | cut -c1-14) total=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)"
  while IFS=, read -r pid mib; do
    [ -z "$pid" ] && continue
    pid=$(echo $pid); cmd=$(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -o -E 'tuned\.[a-z_.]+|--spare|compile' | tr '\n' '+' )
    line="$line $pid:$(echo $mib):${cmd:-?}"
  done < <(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null)
  echo "$line" >> "$1"
  sleep 1
done

# Helpers for the scripts that read callgrind's output (count.sh, count_sweeps.sh); sourced.

# Inclusive instructions per function of one callgrind file, as "Ir<TAB>function" lines (every
# function, its largest figure where callgrind_annotate lists it more than once).
inclusive() { # file
  callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$1" 2>/dev/null |
    awk '/^ *[0-9][0-9,]* +\(/ && !/PROGRAM TOTALS/ {
      ir = $1; gsub(",", "", ir);
      line = $0; sub(/^ *[0-9,]+ +\([^)]*\) +/, "", line);
      sub(/ \[[^]]*\]$/, "", line); sub(/^[^:]*:/, "", line);
      if (!(line in best) || ir + 0 > best[line]) best[line] = ir + 0
    } END { for (l in best) printf "%d\t%s\n", best[l], l }'
}

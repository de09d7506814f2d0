# Sourced by the scripts in bench/: `stamp COMMAND...` prints the line every
# measured table in docs/results carries: the commit (and whether the
# working tree differed from it), the machine (CPU model and online CPUs),
# the date, and the command that produced the table.
stamp() {
  local root commit dirty cpu cores
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "no git")
  dirty=$(git -C "$root" diff --quiet HEAD -- src include 2>/dev/null || echo " with changes")
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  cores=$(nproc)
  echo "Measured at commit ${commit}${dirty} on ${cpu:-an unknown CPU} (${cores} CPUs), $(date -u +%F): \`$*\`"
}

#!/bin/sh
# Open MPI launch agent (plm_rsh_agent) that stands in for ssh in the
# multi-host test: mpirun calls it as `netns_agent.sh HOST COMMAND...`, as it
# would call `ssh HOST COMMAND...`, and it runs COMMAND inside the network
# namespace that BATON_NETNS_HOSTS maps HOST to, e.g.
#   BATON_NETNS_HOSTS="10.231.1.1=baton-a 10.231.1.2=baton-b"
host=$1
shift
for pair in $BATON_NETNS_HOSTS; do
  if [ "${pair%%=*}" = "$host" ]; then
    # ssh hands the words to the remote shell joined by spaces; so does this.
    exec ip netns exec "${pair#*=}" /bin/sh -c "$*"
  fi
done
echo "netns_agent.sh: host '$host' is not in BATON_NETNS_HOSTS ('$BATON_NETNS_HOSTS')" >&2
exit 255

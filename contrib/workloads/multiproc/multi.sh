#!/bin/sh
# multiproc: one container, several CUDA processes. A parent shell starts one
# cudamem worker per TAG; each verifies its own device memory and GPU counter
# on every tick and prints "tick N counter=C verify=OK w=TAG".
#
# Usage: multi.sh SIZE_MIB INTERVAL_MS TAG...   (e.g. multi.sh 256 100 w1 w2 w3)
# In the test's container, cudamem is /bin/cudamem and this script /bin/multi.
mib=$1 ms=$2
shift 2
for w in "$@"; do
	/bin/cudamem "$mib" "$ms" "$w" &
done
wait

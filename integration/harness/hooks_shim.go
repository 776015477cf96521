package harness

import (
	"strconv"
	"strings"
)

// HookScriptOn is hookScript with the CGI server on port.
func HookScriptOn(port int) string {
	return strings.ReplaceAll(hookScriptTmpl, "PORT", strconv.Itoa(port))
}

const hookScriptTmpl = `mkdir -p /tmp/www/cgi-bin && cd /tmp/www/cgi-bin &&
cat > ev <<'E'
#!/bin/sh
what=${QUERY_STRING:-$1}
n0=$(grep -c sum=OK /tmp/ticks); n=$n0; i=0
while [ "$n" -le "$n0" ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i+1)); n=$(grep -c sum=OK /tmp/ticks); done
if [ "$n" -gt "$n0" ]; then e="$what after-tick $n"; else e="$what no-tick"; fi
echo "$e" >> /tmp/events
printf 'Content-Type: text/plain\r\n\r\n%s\n' "$e"
E
cat > slow <<'E'
#!/bin/sh
sleep 3
printf 'Content-Type: text/plain\r\n\r\nlate\n'
E
chmod +x ev slow
busybox httpd -f -p 127.0.0.1:PORT -h /tmp/www &
/bin/fakecuda-app 100 | busybox tee /tmp/ticks`

// LogLine is the number of the first line of log holding every want, or -1.
func LogLine(log string, wants ...string) int {
	for i, l := range strings.Split(log, "\n") {
		ok := true
		for _, w := range wants {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return i
		}
	}
	return -1
}

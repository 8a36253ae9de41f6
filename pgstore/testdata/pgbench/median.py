"""Median latency per script of a pgbench -l log (run.sh's summary).

usage: median.py LOGDIR NAME...   (NAME i is pgbench's script number i)
"""
import glob
import statistics
import sys

d = {}
for f in glob.glob(sys.argv[1] + "/pgbench_log.*"):
    for line in open(f):
        p = line.split()  # client, transaction, latency (us), script, epoch, us
        d.setdefault(int(p[3]), []).append(int(p[2]))
names = sys.argv[2:]
base = statistics.median(d[0])
for k in sorted(d):
    m = statistics.median(d[k])
    print(f"{names[k]:24} {m:8.1f} us {m / base:6.3f}x")

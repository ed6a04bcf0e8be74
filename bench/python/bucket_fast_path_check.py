"""Checks that sliding.lua's fixed-window fast path answers and writes exactly as the general path
did before it (the script of commit d14bed1): random bucket calls (check, peek, cost 0, clocks
going back, two configuration fingerprints) on twin keys of one redis-server; replies, hashes and
TTLs must match. A tool beside the server-time bench, not a test of the suite (the vectors in
tests/vectors/ run the shipped script there).

    python3 bench/python/bucket_fast_path_check.py
"""
import sys, random, subprocess, tempfile, time
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parent))
import bucket_server_time as b
import pathlib
new = b.tree_script((b.REPO/'core/src/engine/sliding.lua').read_text())
old = b.script(b.git_show('d14bed1','core/src/engine/script.rs'), b.git_show('d14bed1','core/src/engine/sliding.lua'))
import socket
with socket.socket() as s_:
    s_.bind(('127.0.0.1', 0))
    port = s_.getsockname()[1]
srv = subprocess.Popen(['redis-server','--port',str(port),'--save','','--appendonly','no'], stdout=subprocess.DEVNULL, cwd=tempfile.mkdtemp())
time.sleep(0.5)
try:
    c = b.Connection(port)
    sn, so = c.call('SCRIPT','LOAD',new), c.call('SCRIPT','LOAD',old)
    rnd = random.Random(1)
    n_calls = 0
    for trial in range(300):
        limit = rnd.choice([1,2,3,5,10,1000])
        prec = rnd.choice([1000000, 60000000])
        fps = ['111', '222']
        now = 1_800_000_000_000_000 + rnd.randrange(10**9)
        for step in range(rnd.randrange(1, 40)):
            now += rnd.choice([0, 1, 1000, prec // 3, prec, -prec // 2, 5 * prec])
            op = rnd.choice(['check','check','check','peek'])
            cost = rnd.choice([0,1,1,2,limit])
            fp = rnd.choice(fps)
            args = [op, str(now), cost, fp, 1, limit, prec, prec, 1]
            # (Today's script reads its limits packed, with the fields' prefix: issue #48.)
            packed = [op, str(now), cost, fp, b.packed(1, f'0:{prec}:{prec}:', limit, prec, 1)]
            # (and takes a block key after the pause key since holds gained blocks)
            rn = c.call('EVALSHA', sn, 3, f'{{n{trial}}}:s', f'{{n{trial}}}:p', f'{{n{trial}}}:k', *packed)
            ro = c.call('EVALSHA', so, 2, f'{{o{trial}}}:s', f'{{o{trial}}}:p', *args)
            hn = sorted(c.call('HGETALL', f'{{n{trial}}}:s') or [])
            ho = sorted(c.call('HGETALL', f'{{o{trial}}}:s') or [])
            tn, to = int(c.call('PTTL', f'{{n{trial}}}:s')), int(c.call('PTTL', f'{{o{trial}}}:s'))
            n_calls += 1
            assert rn == ro, (trial, step, args, rn, ro)
            assert hn == ho, (trial, step, args, hn, ho)
            # Today's expiry adds an hour of slack on a client's clock (CLOCK_SLACK_MS, now.lua).
            assert (tn < 0 and tn == to) or abs(tn - 3_600_000 - to) < 50, (trial, step, args, tn, to)
    print('identical replies, hashes and TTLs over', n_calls, 'calls')
finally:
    srv.terminate(); srv.wait()

#!/bin/bash
# Careless options: unknown names -> ValueError, wrong types -> TypeError, bad values -> ValueError,
# relative lock dir -> LockException; the job never runs; extension and polyfill agree.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l
cat > $T/t.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
putenv('CRONLOCK_LOCK_DIR=' . $argv[2]);
$job = function () { return 'RAN'; };
$cases = [
 'unknown option wiat'      => ['ValueError', fn() => cron_guard($job, 'o', ['wiat' => 5])],
 'wait as string'           => ['TypeError',  fn() => cron_guard($job, 'o', ['wait' => '5'])],
 'wait NAN'                 => ['ValueError', fn() => cron_guard($job, 'o', ['wait' => NAN])],
 'max_runtime as string'    => ['TypeError',  fn() => cron_guard($job, 'o', ['max_runtime' => '50'])],
 'on_busy 256'              => ['ValueError', fn() => cron_guard($job, 'o', ['on_busy' => 256])],
 'on_busy -1'               => ['ValueError', fn() => cron_guard($job, 'o', ['on_busy' => -1])],
 'on_busy "1"'              => ['TypeError',  fn() => cron_guard($job, 'o', ['on_busy' => '1'])],
 'on_lost bogus'            => ['ValueError', fn() => cron_guard($job, 'o', ['on_lost' => 'die'])],
 'log relative path'        => ['ValueError', fn() => cron_guard($job, 'o', ['log' => 'cron.log'])],
 'record bogus'             => ['ValueError', fn() => cron_guard($job, 'o', ['record' => 'all'])],
 'once_per on File'         => ['ValueError', fn() => cron_guard($job, 'o', ['once_per' => 60])],
 'logger not callable'      => ['TypeError',  fn() => cron_guard($job, 'o', ['logger' => 'nosuchfn_xyz'])],
 'name with slash'          => ['ValueError', fn() => cron_guard($job, 'a/b')],
 'name ..'                  => ['ValueError', fn() => cron_guard($job, '..')],
 'name empty'               => ['ValueError', fn() => cron_guard($job, '')],
 'name 201 chars'           => ['ValueError', fn() => cron_guard($job, str_repeat('a', 201))],
 'options null'             => ['TypeError',  fn() => cron_guard($job, 'o', null)],
 'File unknown opt mod'     => ['ValueError', fn() => new CronLock\File($argv[2] . '/f.lock', ['mod' => 0600])],
 'File mode string'         => ['TypeError',  fn() => new CronLock\File($argv[2] . '/f.lock', ['mode' => '0600'])],
 'File mode 010000'         => ['ValueError', fn() => new CronLock\File($argv[2] . '/f.lock', ['mode' => 010000])],
 'File shared int'          => ['TypeError',  fn() => new CronLock\File($argv[2] . '/f.lock', ['shared' => 1])],
 'File empty path'          => ['ValueError', fn() => new CronLock\File('')],
 'File NUL path'            => ['ValueError', fn() => new CronLock\File("a\0b")],
 'Redis unknown opt'        => ['ValueError', fn() => new CronLock\Redis('redis://127.0.0.1:1', 'k', null, ['timeout' => 1])],
 'Redis read_timeout str'   => ['TypeError',  fn() => new CronLock\Redis('redis://127.0.0.1:1', 'k', null, ['read_timeout' => '1'])],
 'Redis ttl 0'              => ['ValueError', fn() => new CronLock\Redis('redis://127.0.0.1:1', 'k', 0)],
 'Redis bad dsn'            => ['ValueError', fn() => new CronLock\Redis('redis://127.0.0.1:', 'k')],
 'acquire NAN'              => ['ValueError', fn() => (new CronLock\File($argv[2] . '/g.lock'))->acquire(NAN)],
];
foreach ($cases as $name => [$want, $f]) {
  try { $r = $f(); $got = 'no exception (' . var_export($r, true) . ')'; $msg = ''; }
  catch (Throwable $e) { $got = get_class($e); $msg = $e->getMessage(); }
  printf("%s\t%s\t%s\t%s\n", $got === $want ? 'ok' : 'MISMATCH', $name, $got, $msg);
}
// relative lock dirs
foreach (['env' => fn() => putenv('CRONLOCK_LOCK_DIR=locks'), 'ini' => function () { putenv('CRONLOCK_LOCK_DIR'); ini_set('cronlock.lock_dir', 'locks'); }] as $k => $set) {
  if ($argv[1] === 'poly' && $k === 'ini') continue;
  $set();
  try { $r = cron_guard($job, 'o'); $got = 'no exception (' . var_export($r, true) . ')'; $msg=''; }
  catch (Throwable $e) { $got = get_class($e); $msg = $e->getMessage(); }
  $want = 'CronLock\LockException';
  printf("%s\t%s\t%s\t%s\n", $got === $want ? 'ok' : 'MISMATCH', "relative lock dir ($k)", $got, $msg);
}
PHP
cd $T
$PHPX $T/t.php ext $T/l > $T/ext.out 2>&1
php $T/t.php poly $T/l > $T/poly.out 2>&1
echo "--- extension"; cat $T/ext.out; echo "--- polyfill"; cat $T/poly.out
grep -q MISMATCH $T/ext.out && fail "extension: $(grep -c MISMATCH $T/ext.out) mismatches"
grep -q MISMATCH $T/poly.out && fail "polyfill: $(grep -c MISMATCH $T/poly.out) mismatches"
[ -e $T/locks ] && fail "a relative lock dir was created in cwd"
finish

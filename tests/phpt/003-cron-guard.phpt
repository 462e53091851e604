--TEST--
cron_guard() runs the job under a lock and returns its result
--EXTENSIONS--
cronlock
--FILE--
<?php
$path = sys_get_temp_dir() . '/cronlock-phpt-guard-' . getmypid() . '.lock';
$lock = new CronLock\File($path);
var_dump(cron_guard(fn (CronLock\Guard $g) => $g->lock()->isHeld() ? 'ran' : 'not held', $lock));
var_dump($lock->isHeld());
unlink($path);
?>
--EXPECT--
string(3) "ran"
bool(false)

--TEST--
CronLock\File: a lock is taken, seen held by a second object, and given back
--EXTENSIONS--
cronlock
--FILE--
<?php
$path = sys_get_temp_dir() . '/cronlock-phpt-' . getmypid() . '.lock';
$a = new CronLock\File($path);
$b = new CronLock\File($path);
var_dump($a->acquire(0), $a->isHeld(), $b->acquire(0), $a->release(), $b->acquire(0), $b->release());
unlink($path);
?>
--EXPECT--
bool(true)
bool(true)
bool(false)
bool(true)
bool(true)
bool(true)

--TEST--
cronlock loads and names the PHP it was built for
--EXTENSIONS--
cronlock
--FILE--
<?php
var_dump(extension_loaded('cronlock'));
var_dump(class_exists('CronLock\File'), interface_exists('CronLock\Lock'), function_exists('cron_guard'));
var_dump(phpversion('cronlock') !== false);
?>
--EXPECT--
bool(true)
bool(true)
bool(true)
bool(true)
bool(true)

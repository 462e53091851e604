<?php

// cronlock/polyfill: the cronlock API in plain PHP, for hosts where the
// cronlock extension is not loaded. With the extension loaded this file
// defines nothing and the extension serves every call.

if (!extension_loaded('cronlock') && !function_exists('cron_guard')) {
    require __DIR__ . '/src/autoload.php';
}

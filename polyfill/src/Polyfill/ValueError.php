<?php

if (!class_exists('ValueError', false)) {
    /**
     * PHP 8's \ValueError for PHP 7: thrown by cronlock/polyfill for an argument
     * of the right type but a bad value, as the extension and PHP 8 do.
     */
    class ValueError extends Error
    {
    }
}

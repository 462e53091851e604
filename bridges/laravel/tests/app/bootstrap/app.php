<?php

// The application, as a new Laravel 8 application makes it. FIXTURE_NOW (a
// date) fakes Laravel's clock (Carbon's test now), so a test can run the
// scheduler's ticks of many minutes, or of a day later, in a few seconds;
// cronlock's locks keep the real clock.

if (($now = getenv('FIXTURE_NOW')) !== false && $now !== '') {
    Illuminate\Support\Carbon::setTestNow(Illuminate\Support\Carbon::parse($now));
}

$app = new Illuminate\Foundation\Application(dirname(__DIR__));

$app->singleton(Illuminate\Contracts\Console\Kernel::class, App\Console\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, Illuminate\Foundation\Exceptions\Handler::class);

return $app;

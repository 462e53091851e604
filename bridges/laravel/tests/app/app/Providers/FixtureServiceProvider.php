<?php

namespace App\Providers;

use App\NaiveFileMutex;
use Illuminate\Console\Scheduling\EventMutex;
use Illuminate\Support\ServiceProvider;

/** The test application's own provider: FIXTURE_NAIVE_MUTEX=1 binds App\NaiveFileMutex. */
final class FixtureServiceProvider extends ServiceProvider
{
    public function register()
    {
        if (getenv('FIXTURE_NAIVE_MUTEX') === '1') {
            $this->app->singleton(EventMutex::class, NaiveFileMutex::class);
        }
    }
}

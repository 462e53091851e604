<?php

namespace CronLock\Laravel;

use CronLock\Laravel\Console\ClearCacheCommand;
use CronLock\Laravel\Console\RunCommand;
use Illuminate\Console\Events\CommandStarting;
use Illuminate\Console\Scheduling\EventMutex;
use Illuminate\Console\Scheduling\Schedule;
use Illuminate\Console\Scheduling\ScheduleClearCacheCommand;
use Illuminate\Console\Scheduling\SchedulingMutex;
use Illuminate\Support\ServiceProvider;

/**
 * cronlock for Laravel's scheduler, discovered through composer.json's
 * extra.laravel.providers. The scheduler asks the container for its
 * EventMutex and SchedulingMutex (Schedule's constructor): binding them is
 * the whole entry point for withoutOverlapping() and onOneServer(); the
 * rest keeps the commands around them right.
 */
final class CronLockServiceProvider extends ServiceProvider
{
    public function register()
    {
        $this->mergeConfigFrom(dirname(__DIR__) . '/config/cronlock.php', 'cronlock');

        $this->app->singleton(Locks::class, function ($app) {
            return new Locks((array) $app['config']->get('cronlock', []), $app->storagePath() . '/framework/cronlock');
        });
        $this->app->singleton(ScheduleRewriter::class);
        $this->app->singleton(EventMutex::class, CronLockEventMutex::class);
        $this->app->singleton(SchedulingMutex::class, CronLockSchedulingMutex::class);

        // schedule:clear-cache shows the holders instead of deleting live locks.
        $this->app->extend(ScheduleClearCacheCommand::class, function () {
            return $this->app->make(ClearCacheCommand::class);
        });
    }

    public function boot()
    {
        $this->publishes([dirname(__DIR__) . '/config/cronlock.php' => $this->app->configPath('cronlock.php')], 'cronlock-config');

        if (!$this->app->runningInConsole()) {
            return;
        }
        $this->commands([RunCommand::class]);

        // schedule:list shows the commands as the user wrote them.
        $this->app['events']->listen(CommandStarting::class, function (CommandStarting $event) {
            if ($event->command === 'schedule:list') {
                $this->app->make(ScheduleRewriter::class)->showOriginals();
            }
        });

        // Rewrite after everything that adds events at the schedule's
        // resolution (the console kernel's schedule(), packages'
        // callAfterResolving()): registered once every provider has booted.
        $this->app->booted(function () {
            $rewrite = function (Schedule $schedule) {
                $this->app->make(ScheduleRewriter::class)->rewrite($schedule);
            };
            $this->app->afterResolving(Schedule::class, $rewrite);
            if ($this->app->resolved(Schedule::class)) {
                $rewrite($this->app->make(Schedule::class));
            }
        });
    }
}

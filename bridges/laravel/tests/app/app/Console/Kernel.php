<?php

namespace App\Console;

use Illuminate\Console\Scheduling\Schedule;
use Illuminate\Foundation\Console\Kernel as ConsoleKernel;
use Illuminate\Support\Facades\Artisan;

/**
 * The schedule is the test's: schedule.php in the application directory
 * returns a function that receives the Schedule, as a user's schedule()
 * method would be written. `fixture:job` is the job every event runs.
 */
class Kernel extends ConsoleKernel
{
    protected function schedule(Schedule $schedule)
    {
        $file = base_path('schedule.php');
        if (is_file($file)) {
            (require $file)($schedule);
        }
    }

    protected function commands()
    {
        Artisan::command('fixture:job {journal} {label} {seconds}', function (string $journal, string $label, string $seconds) {
            return \CronLock\Tests\Frameworks\Fixture\Job::run($journal, $label, (float) $seconds);
        })->describe('The test job: writes its start and end to a journal');
    }
}

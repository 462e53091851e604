<?php

namespace CronLock\Cli\Redis;

/** RESP2 over a PHP stream (tcp://, tls://, unix://): enough for the read-only commands of `status`. */
final class RespConnection extends Connection
{
    /** @var resource|null */
    private $stream;

    public function client(): string
    {
        return 'builtin';
    }

    protected function connect(Dsn $dsn, array $node)
    {
        $schemes = ['tcp' => 'tcp', 'tls' => 'tls', 'unix' => 'unix'];
        $target = $dsn->transport === 'unix' ? "unix://{$node[0]}" : $schemes[$dsn->transport] . '://' . Dsn::address($node);
        $context = stream_context_create($dsn->transport === 'tls' ? ['ssl' => self::tlsContext($dsn) + ['peer_name' => $node[0]]] : []);
        $errno = 0;
        $error = '';
        $stream = @stream_socket_client($target, $errno, $error, self::CONNECT_TIMEOUT, STREAM_CLIENT_CONNECT, $context);
        if ($stream === false) {
            throw new \RuntimeException("cannot connect to Redis at {$this->address}: " . ($error !== '' ? $error : 'connection failed'));
        }
        stream_set_timeout($stream, (int) self::READ_TIMEOUT);
        $this->stream = $stream;
        if (!$this->sentinel) {
            $this->login($dsn);
        }
    }

    public function command(array $args)
    {
        $out = '*' . count($args) . "\r\n";
        foreach ($args as $arg) {
            $out .= '$' . strlen((string) $arg) . "\r\n$arg\r\n";
        }
        for ($sent = 0; $sent < strlen($out);) {
            $n = @fwrite($this->stream, substr($out, $sent));
            if ($n === false || $n === 0) {
                throw new \RuntimeException("Redis at {$this->address}: the connection broke");
            }
            $sent += $n;
        }
        return $this->reply();
    }

    private function reply()
    {
        $line = $this->line();
        $rest = substr($line, 1);
        switch ($line[0]) {
            case '+':
                return $rest;
            case '-':
                throw new ReplyError($rest);
            case ':':
                return (int) $rest;
            case '$':
                if ((int) $rest < 0) {
                    return null;
                }
                $data = $this->exactly((int) $rest + 2);
                return substr($data, 0, -2);
            case '*':
                if ((int) $rest < 0) {
                    return null;
                }
                $items = [];
                for ($i = 0; $i < (int) $rest; $i++) {
                    $items[] = $this->reply();
                }
                return $items;
        }
        throw new \RuntimeException("Redis at {$this->address}: a reply this client does not understand");
    }

    private function line(): string
    {
        $line = fgets($this->stream);
        if ($line === false || substr($line, -2) !== "\r\n") {
            $meta = stream_get_meta_data($this->stream);
            throw new \RuntimeException("Redis at {$this->address}: " . ($meta['timed_out'] ? 'no reply within ' . (int) self::READ_TIMEOUT . ' s' : 'the connection broke'));
        }
        return substr($line, 0, -2);
    }

    private function exactly(int $length): string
    {
        $data = '';
        while (strlen($data) < $length) {
            $chunk = fread($this->stream, $length - strlen($data));
            if ($chunk === false || $chunk === '') {
                throw new \RuntimeException("Redis at {$this->address}: the connection broke");
            }
            $data .= $chunk;
        }
        return $data;
    }

    public function close()
    {
        if (is_resource($this->stream)) {
            fclose($this->stream);
        }
        $this->stream = null;
    }
}
